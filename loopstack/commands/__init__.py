"""Subcommands of the `loopstack` command (registered in `loopstack.cli.SUBCOMMANDS`)."""
