"""The grading kernel's program: the grader copies it as rt/grading_kernel.py beside its copy of this package.

Started there (by the sandbox's command, or run by a zygote's kernel), its folder is `sys.path[0]`, so the
package is imported from that copy, by the name of its folder, before any student code can run.
"""

PACKAGE = "guard_kernel"  # the folder the grader copies this package into, beside this script (worker.py)

if __name__ == "__main__":
    import importlib

    importlib.import_module(f"{PACKAGE}.kernel").main(program=globals())
