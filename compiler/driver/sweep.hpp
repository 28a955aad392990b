// `gcompile sweep BASE.toml --set KEY=V1,V2 [--set ...] -o DIR`: a grid over
// spec keys. Writes one committable spec per point into DIR (each `extends`
// BASE and names its changes), generates and builds every tree (trees of a
// γ/seed sweep share their compiled objects: docs/architecture.md), and with
// --train trains them and writes DIR/report.html over all runs.
#pragma once

namespace gc {

// argv after "sweep"; returns the process exit status (0 ok, 1 error, 2 usage).
int sweep_command(int argc, char** argv);

}  // namespace gc
