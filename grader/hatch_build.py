"""Build hook: an editable install of the grader is the checkout itself.

The wheel force-includes `../autograder` (pyproject.toml), and hatchling copies forced files into editable
wheels as well, where the copy in site-packages would shadow the checkout that `dev-mode-dirs` puts on the
path: every part a hub starts outside the checkout's folder would run the code of the last install. Hatchling
replaces the forced files of an editable build by `force_include_editable` when a hook sets it; this hook sets
it to one small file that says where the code is.
"""

import os
import tempfile

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MARKER = "_devicelab_grader_editable.txt"


class EditableIsTheCheckout(BuildHookInterface):
    def initialize(self, version: str, build_data: dict) -> None:
        if version != "editable":
            return
        checkout = os.path.normpath(os.path.join(self.root, ".."))
        handle, path = tempfile.mkstemp(suffix=".txt")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(f"devicelab-grader is installed editable: its code is {checkout}/autograder\n")
        build_data["force_include_editable"] = {path: MARKER}
        self.marker = path

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        if version == "editable":
            os.unlink(self.marker)  # the wheel holds its copy
