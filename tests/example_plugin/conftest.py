# package/ is the example plugin's own source tree: its tests run against the *installed*
# package, in a subprocess started by test_example_package.py, not in this test session.
collect_ignore = ["package"]
