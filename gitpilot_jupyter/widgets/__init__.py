"""ipywidgets for the sandbox: the settings panel and the plan approval card."""
