from coderai.cli.main import main

raise SystemExit(main())
