"""The live tournament page: a small web app that shows a running (or finished) tournament in a browser.

Start it with ``podium dashboard RUN_DIR`` or, from Python, :func:`serve_dashboard` (blocking) or
:func:`make_app` (an ASGI app to serve yourself), and open http://127.0.0.1:8050/. Every 2 s the page reads
the tournament's status (running or finished, elapsed time, target, budgets, the orchestrator's heartbeat),
its leaderboard, the pool, the newest results and the learning curves, and redraws the tables and charts
without a reload; if a poll fails it keeps the last state and says so. It only reads (the database is opened
read-only and never claimed), so it runs beside the orchestrator, on SQLite or PostgreSQL alike.

JSON routes: ``GET /api/state`` (everything the page shows) and ``GET /api/curve/{pod_id}``.

Needs the deploy extra (FastAPI, uvicorn): ``pip install 'podium[deploy]'``.
"""

from __future__ import annotations

from podium.deploy.dashboard.app import DEFAULT_PORT, make_app, serve_dashboard
from podium.deploy.dashboard.state import TournamentWatch

__all__ = ["DEFAULT_PORT", "TournamentWatch", "make_app", "serve_dashboard"]
