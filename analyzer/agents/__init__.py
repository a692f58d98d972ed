"""`gpuanalyze mcp`: the analysis as read-only tools for coding agents (Model Context Protocol on stdio)."""
