# TorchX's test modules are loaded by tests/tracker/test_torchx_suite.py with our stores in place of
# TorchX's backends; collected on their own they would test TorchX's backends instead.
collect_ignore_glob = ["*_test.py"]
