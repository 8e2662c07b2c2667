from torchx_airflow_tracker.cli import main

raise SystemExit(main())
