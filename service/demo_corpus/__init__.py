"""A dozen short Markdown notes on astronomy that the `demo` command indexes."""
