"""Reporting: tables and the markdown report (report), figures (figures), the generated pages (readme) and the
static site (site). Their commands are in harness/commands/."""
