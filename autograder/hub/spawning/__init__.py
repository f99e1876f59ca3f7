"""What the running hub runs: JupyterHub's spawner with each server's limits and box, the parts' network
namespaces, and the settings that keep staff from running a submission outside the sandbox. `hub setup`
(hub/setup/) installs; this package is what JupyterHub and `hub start` import on every spawn and start."""
