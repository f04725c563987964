// `glimpse up` (start a local cluster: coordinator, cache node, decode worker, frontend; keep it
// running until interrupted, or with --chat run a chat from stdin against it and stop) and
// `glimpse chat` (a multi-turn chat against a running frontend). See chat_client.h for the turn
// lines and what is printed per turn.
#pragma once

namespace glimpse::cli {

// Process exit codes as every subcommand: 0, 1 on an error, 2 on bad usage.
int UpCommand(int argc, char** argv);
int ChatCommand(int argc, char** argv);

}  // namespace glimpse::cli
