"""Every knob of the provider: ``[torchx]`` options, connection settings, the resolver, and their checks."""
