"""The mechanism of one TorchX app run: submit or reattach, wait, finish, and the judgement of a kill."""
