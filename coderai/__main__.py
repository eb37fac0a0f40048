from coderai.cli import main

raise SystemExit(main())
