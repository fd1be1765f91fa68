# The administrator's sandbox settings for every user's single-user server of a hub.
# A plain hub: /etc/jupyter/jupyter_server_config.py (root-owned, read by every server).
# Zero to JupyterHub: in the image, or as a file mounted under /etc/jupyter.
# tests/hub/ runs a real hub with exactly this file.
c = get_config()  # noqa: F821

# No `off` (pass-through, no isolation): a user cannot choose or save it.
# Add "matrixlab" when a Runner is set up for the users (docs/admin/matrixlab.md).
c.SandboxApp.allowed_backends = ["subprocess"]
# Every run needs an approval token, whatever GITPILOT_SANDBOX_REQUIRE_APPROVAL says.
c.SandboxApp.require_approval = True
# Fail closed: where no engine walls a snippet off the user's files, or a network-on run
# would share the host's network, the plan is refused (409) instead of run.
c.SandboxApp.allow_uncontained = False
# The strongest engine the host allows: bubblewrap, else the namespace-free Landlock engine.
c.SandboxApp.isolation = "auto"
# The longest timeout a snippet may ask for, in seconds.
c.SandboxApp.max_timeout_sec = 300
# No server variable reaches a snippet but PATH, locale, TZ and TERM.
c.SandboxApp.env_passthrough = []
# Only the server's owner ($JUPYTERHUB_USER) changes the sandbox settings, and not to
# turn the network on for every run (one run may still ask for it in its plan).
c.SandboxApp.user_may_weaken = False
