# The single-user image that docs/hub/z2jh-values.yaml names: a Jupyter docker-stacks image with the course's
# instructor tools (nbgrader, JupyterLab) and the JupyterHub version of the chart's hub (4.4.0 ships JupyterHub
# 5.5.0; tests/test_z2jh_values.py checks that the two agree). Pin a dated base tag for a class.
#
#   docker build -f docs/hub/singleuser.Dockerfile -t ghcr.io/devicelab-course/device-lab-singleuser:2026.11 .
FROM quay.io/jupyter/minimal-notebook:python-3.12

# The course (devicelab) and the grader and hub (devicelab-grader, grader/pyproject.toml: the exchange service's
# client classes that the values' nbgrader_config.py names, the exchange service and the grader, as commands).
RUN pip install --no-cache-dir \
        "jupyterhub==5.5.0" \
        "devicelab[instructor] @ git+https://github.com/devicelab-course/device-lab@main" \
        "devicelab-grader @ git+https://github.com/devicelab-course/device-lab@main#subdirectory=grader"
