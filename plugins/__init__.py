"""Built-in plugins of plugin-host."""
