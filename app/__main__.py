import sys

from branchscope.app.cli import entry

sys.exit(entry())
