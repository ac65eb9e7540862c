"""The course on a JupyterHub: ``make hub`` (one machine) and the files for Zero to JupyterHub.

See docs/hub.md. The hub's configuration is ``hub/jupyterhub_config.py``; the helpers it and
the tests share are in :mod:`hub.course_hub`.
"""
