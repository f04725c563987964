// `glimpse generate`: run the model on a prompt or a chat and print the continuation.
#pragma once

namespace glimpse::cli {

// Returns the process exit code: 0 on success, 1 on an error (printed to stderr), 2 on bad usage.
int GenerateCommand(int argc, char** argv);

}  // namespace glimpse::cli
