"""The live tournament page as a FastAPI app (:func:`make_app`) and a blocking server (:func:`serve_dashboard`).

Routes: ``GET /`` the page (static HTML and vanilla JavaScript that polls the JSON every 2 s and draws the
tables and SVG charts; nothing is loaded from the internet), ``GET /api/state`` everything it shows
(:meth:`~podium.deploy.dashboard.state.TournamentWatch.state`), ``GET /api/curve/{pod_id}`` one pod's
learning curve. Everything is read-only.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

try:
    from fastapi import FastAPI, HTTPException
    from fastapi.responses import FileResponse
    from fastapi.staticfiles import StaticFiles
except ImportError:  # pragma: no cover - the deploy extra is missing
    raise ImportError("the live tournament page needs FastAPI and uvicorn: pip install 'podium[deploy]'") from None
import sqlalchemy as sa

from podium.deploy import http
from podium.deploy.dashboard.state import TournamentWatch
from podium.tournament.leaderboard import DatabaseError

__all__ = ["DEFAULT_PORT", "STATIC", "make_app", "serve_dashboard"]

DEFAULT_PORT = 8050
"""The page's default TCP port (Ray's own dashboard has 8265)."""
STATIC = Path(__file__).resolve().parent / "static"
"""The page's files (``index.html``, ``dashboard.js``, ``dashboard.css``)."""
_NO_CACHE = {"Cache-Control": "no-store"}


def make_app(tournament_dir: str | Path, *, database_url: str | None = None) -> FastAPI:
    """The live page of the tournament in ``tournament_dir`` as an ASGI app (serve it with uvicorn, or use
    :func:`serve_dashboard`).

    Args:
        tournament_dir: a tournament's run directory, or an empty directory a tournament will start in (the
            page says it waits, and shows the tournament once it starts).
        database_url: the leaderboard database's URL where it differs from the one the tournament recorded
            (e.g. ``postgresql://user:pw@localhost:5432/podium`` through a port-forward). Default: the recorded
            one (for SQLite, the file in the run directory).

    Raises:
        FileNotFoundError: ``tournament_dir`` does not exist.
        ValueError: it is not a tournament's directory (the message names what it is and what to give).
        DatabaseError: the database cannot be opened or does not hold the tournament.
    """
    watch = TournamentWatch(tournament_dir, database_url=database_url)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            watch.close()

    app = FastAPI(
        title=f"podium dashboard: {watch.root}",
        description="The live state of a podium tournament (read-only).",
        lifespan=lifespan,
    )
    app.state.watch = watch

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers=_NO_CACHE)

    @app.get("/api/state")
    def state() -> dict[str, Any]:
        """The tournament's status, leaderboard, pool, recent results and progress (see ``TournamentWatch.state``)."""
        try:
            return watch.state()
        except (DatabaseError, sa.exc.SQLAlchemyError, ValueError) as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise HTTPException(503, f"cannot read the tournament right now: {reason}", headers=_NO_CACHE) from None

    @app.get("/api/curve/{pod_id}")
    def curve(pod_id: str, lineage: bool = False) -> dict[str, Any]:
        """One pod's learning curve (evaluations against env steps), with ``lineage=true`` also its ancestors';
        404 for a pod this tournament does not have."""
        try:
            return watch.curve(pod_id, lineage=lineage)
        except KeyError:
            raise HTTPException(404, f"no pod {pod_id!r} in this tournament") from None
        except (DatabaseError, sa.exc.SQLAlchemyError, ValueError) as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise HTTPException(503, f"cannot read the tournament right now: {reason}") from None

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def serve_dashboard(
    tournament_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    database_url: str | None = None,
    log_level: str = "warning",
) -> None:
    """Serve the live page of the tournament in ``tournament_dir`` until Ctrl-C (blocking).

    Prints the page's address first. The page has no authentication: keep ``host`` on loopback (the default)
    and reach it from elsewhere through a tunnel (``ssh -L 8050:127.0.0.1:8050 HOST``); another ``host`` is
    served with a warning.

    Args:
        tournament_dir, database_url: as for :func:`make_app` (checked before the server starts).
        host: address to listen on.
        port: TCP port (0: any free one, printed).
        log_level: uvicorn's log level (``warning``: no line per request).

    Raises:
        FileNotFoundError, ValueError, DatabaseError: as :func:`make_app`.
        OSError: the port is taken or the address is not this machine's.
        ImportError: uvicorn is missing.
    """
    app = make_app(tournament_dir, database_url=database_url)
    http.run(app, host, port, what=f"podium dashboard of {app.state.watch.root}", log_level=log_level)
