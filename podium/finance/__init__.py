"""Finance: market data, technical indicators and stock-trading environments.

Modules (import them directly; this package itself stays light so that ``podium.envs`` can
register the trading env without loading pandas):

* :mod:`podium.finance.data`: load, validate, align and split long-format OHLCV tables; the
  shipped Dow-29 and ETF data sets;
* :mod:`podium.finance.indicators`: FinRL's technical indicators and the turbulence index;
* :mod:`podium.finance.market`: a market as ``[T, S]`` arrays, the environments' input;
* :mod:`podium.finance.env`: :class:`~podium.finance.env.StockTradingVecEnv` (batched, torch) and
  :class:`~podium.finance.env.StockTradingEnv` (one account, gymnasium).

>>> import podium.envs
>>> env = podium.envs.make("StockTrading-v0", num_envs=1024, seed=0)  # Dow-29, 2009-2015


The trading env is registered with :func:`podium.envs.make` by ``podium.envs`` itself, through an
import path string, so the envs room never imports this one.
"""
