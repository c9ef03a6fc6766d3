"""The one exception the plan database raises for anything the user must act on."""

# Appended to every message about a file we refuse to open: the user's way out, which
# never involves us touching their file.
RECOVERY_HINT = "move it aside or pass --db NEW_PATH; `autotune db check` tells more"


class DBError(Exception):
    """A plan database that cannot be used: one line naming the path, the problem and
    the way out.  The file is never modified when this is raised on open."""


def missing_db(path) -> DBError:
    """The error for a command that only reads the database, given a path where none is."""
    return DBError(f"{path}: no plan database there; run `autotune search --db {path}` to make "
                   f"one, or pass the --db a search wrote")
