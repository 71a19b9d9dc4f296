"""The routing kernel benchmark; the code lives in `mhar_probe.bench.routing` (`mhar bench routing`)."""

from mhar_probe.cli.bench import routing_main as main

if __name__ == "__main__":
    main()
