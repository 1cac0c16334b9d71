"""The command domain: a problem is a directory with `problem.toml`, a program built, run and
checked by commands (docs/command.md). Parent side: `spec` (the file's typed form), `problem`
(the directory as a Problem), `domain` (the Domain protocol). Worker side, standard library
only: `worker` (the stages), `forbid` (forbidden dependencies), `outputs` (objective and
output reading, numeric comparison), `placeholders` (hidden inputs)."""
