"""Built-in camera plugins: ``synthetic`` (a deterministic moving test pattern) and ``replay``
(plays a recorded-frames file). Each module is one plugin, registered under the entry-point
group ``plugin_host``; importing this package imports neither."""
