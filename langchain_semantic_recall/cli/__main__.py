"""`python -m langchain_semantic_recall.cli`: the `semantic-recall` command."""

import sys

from langchain_semantic_recall.cli import main

sys.exit(main())
