from rankrepro.cli import main

raise SystemExit(main())
