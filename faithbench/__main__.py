from faithbench.bench.cli import main

raise SystemExit(main())
