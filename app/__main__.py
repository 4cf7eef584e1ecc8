import sys

from branchscope.app.cli import main

sys.exit(main())
