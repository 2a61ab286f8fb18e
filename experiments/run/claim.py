"""Claiming a folder for a new run: a run writes into a folder of its own, or into one whose run `--force`
lets it replace, never into one a run is still writing to."""

from __future__ import annotations

import shutil
from pathlib import Path

from experiments.faults.process import processes_with_marker
from experiments.folders.comparison_folder import runs_held
from experiments.folders.run_folder import LOCK_FILE


class FolderRefused(Exception):
    """A run may not write into this folder; the message says why and what to do instead."""


def claim(folder: Path, *, force: bool) -> str:
    """Make sure a run writes into a folder of its own, before anything is started; returns what was
    deleted ("" when nothing was).

    A new or empty folder is taken as it is. A folder with anything in it is refused: a second run there
    would find the first one's broker data (its topics exist already) and append to its event files.
    With `force`, a folder that holds a run (its lock.json) or the runs of a compare (a lock.json one
    level down) is deleted first; any other folder, or one a run is still writing to, is refused even
    then."""
    folder = Path(folder)
    if not folder.exists():
        return ""
    if not folder.is_dir():
        raise FolderRefused(f"--out {folder} is a file; give a folder")
    if not any(folder.iterdir()):
        return ""
    held = runs_held(folder)
    if not force:
        what = f"holds {held}" if held else "is not empty"
        raise FolderRefused(f"--out {folder} {what}; choose another --out, or add --force to delete it and run again")
    if not held:
        raise FolderRefused(f"--out {folder} is not empty and holds no run (no {LOCK_FILE}); --force deletes only "
                            "a run's folder, so choose another --out")
    cwd = Path.cwd().resolve()
    if cwd == folder.resolve() or folder.resolve() in cwd.parents:
        raise FolderRefused(f"--out {folder} contains the current directory; run from elsewhere to replace it")
    candidates = [folder, *(child for child in folder.iterdir() if child.is_dir())]
    live = sorted({pid for candidate in candidates for pid in processes_with_marker(str(candidate.resolve()))})
    if live:
        raise FolderRefused(f"--out {folder}: a run is still writing there (processes {', '.join(map(str, live[:5]))}); "
                            "stop it first, or choose another --out")
    shutil.rmtree(folder)
    return held
