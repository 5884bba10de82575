"""`python -m langchain_semantic_recall.cli`: the `semantic-recall` command."""

import sys

from langchain_semantic_recall.cli import main

if __name__ == "__main__":  # (importing the module, as a module scan does, runs nothing)
    sys.exit(main())
