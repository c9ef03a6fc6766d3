"""The one exception the plan database raises for anything the user must act on."""

# Appended to every message about a file we refuse to open: the user's way out, which
# never involves us touching their file.
RECOVERY_HINT = "move it aside or pass --db NEW_PATH; `autotune db check` tells more"


class DBError(Exception):
    """A plan database that cannot be used: one line naming the path, the problem and
    the way out.  The file is never modified when this is raised on open."""


def missing_db(path, given: bool = True) -> DBError:
    """The error for a command that only reads the database, given a path where none is
    (``given``: named by --db, not the default one)."""
    search = f"autotune search --db {path}" if given else "autotune search"
    return DBError(f"{path}: no plan database there; run `{search}` to make one, or pass the "
                   f"--db a search wrote")
