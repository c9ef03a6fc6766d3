"""The plan cache: workloads, trial history and best plans in one SQLite file."""
from .check import check_file
from .errors import RECOVERY_HINT, DBError
from .keys import SCHEMA_VERSION, PlanKey, canonical_json
from .schema import MIGRATIONS
from .store import PlanDB, default_db_path

__all__ = ["DBError", "MIGRATIONS", "PlanDB", "PlanKey", "RECOVERY_HINT", "SCHEMA_VERSION",
           "canonical_json", "check_file", "default_db_path"]
