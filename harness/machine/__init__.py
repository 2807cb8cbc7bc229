"""The target machine: targets and backends (hardware, backends), the machine probe (probe) and utilisation sampling
(utilisation)."""
