"""python -m meridian.engine_replay: `meridian engine-replay` (meridian/engine_replay/cli.py)."""
from .cli import main

raise SystemExit(main())
