"""What the hostile-input tests expect of a refused command: exit 2 and one `vlabench: error:` line, no traceback."""

from pathlib import Path

from harness.cli import main


def one_line_error(capsys, args) -> str:
    """Run the command; it must exit 2 with one `vlabench: error:` line and no traceback."""
    code = main([str(a) for a in args])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("vlabench: error: ") and "Traceback" not in err, err
    return err


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}
