"""Reports: terminal tables now; Markdown, plots and HTML build on the same records."""
