# The single-user image that docs/hub/z2jh-values.yaml names: a Jupyter docker-stacks image with the course's
# instructor tools (nbgrader, JupyterLab) and the JupyterHub version of the chart's hub (4.4.0 ships JupyterHub
# 5.5.0; tests/test_z2jh_values.py checks that the two agree). Pin a dated base tag for a class.
#
#   docker build -f docs/hub/singleuser.Dockerfile -t ghcr.io/devicelab-course/device-lab-singleuser:2026.11 .
FROM quay.io/jupyter/minimal-notebook:python-3.12

RUN pip install --no-cache-dir \
        "jupyterhub==5.5.0" \
        "devicelab[instructor] @ git+https://github.com/devicelab-course/device-lab@main"

# The instructor's package (the wheel holds only devicelab): the exchange service's client classes that the
# values' nbgrader_config.py names (autograder/hub/http_exchange/client.py), the exchange service, the grader.
COPY autograder /opt/devicelab/autograder
ENV PYTHONPATH=/opt/devicelab
