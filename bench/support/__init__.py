"""What the benchmarks in bench/ share, none of it run by users: settings and option parsing, the dataset,
measuring, the processes bench.run and bench.internals start (a peer, a cell, the encode ceiling), the keyed
change stream, scan timing and the internals page's renderer. The entry points users run are bench/*.py."""
