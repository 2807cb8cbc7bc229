"""Reporting: tables and the markdown report (report), figures (figures), the generated pages (readme); the commands
show, report and readme (*_cli)."""
