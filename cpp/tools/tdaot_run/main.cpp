// tdaot-run: inspect, smoke-run and benchmark a tdaot package from the command line.
//
//   tdaot-run inspect PKG [--json]                                             (inspect.cpp)
//   tdaot-run verify PKG|WEIGHTS [--sha256 HEX] [--public-key PUB.pem]...       (verify.cpp)
//   tdaot-run run PKG [--batch B] [--random] [--seed S] [--inputs FILE.json] [--op-lib LIB]...
//                                                                                  (run.cpp)
//   tdaot-run bench PKG [--batch B] [--iters N] [--warmup W] [--threads T] [--runners R]
//                       [--callers C] [--bind] [--json] [--op-lib LIB]...        (bench.cpp)
//   tdaot-run soak PKG [--calls N] [--batch B] [--samples S] [--warmup-calls W]
//                      [--max-growth-kib K] [--session] [--seed S] [--json] [--op-lib LIB]...
//                                                                                 (soak.cpp)
//   tdaot-run swap PKG WEIGHTS [--batch B] [--seed S] [--public-key PUB.pem]... [--op-lib LIB]...
//                                                                                 (swap.cpp)
//
// --op-lib loads a shared library registering custom operators the package calls (the
// manifest's custom_ops, shown by inspect) before the package; repeat it for several.
// run, bench, soak and swap also take --sha256 HEX (refuse any other package: pinning),
// --public-key PUB.pem (repeatable: refuse a package, and swap a weight file, without a valid
// signature by one of these keys) and --temp-dir DIR (where the package is extracted while it
// loads). verify checks the sha256 digests of every file of a package (and --sha256,
// --public-key) without loading it, and prints its sha256; given a weight file, its digests
// and --public-key.
//
// Exit codes (common.h, decided here): 0 success, 1 a tdaot error (message on stderr), 2 bad
// usage, 3 a soak whose RSS grew by more than --max-growth-kib.
#include <CLI/CLI.hpp>
#include <iostream>

#include "common.h"
#include "tdaot/errors.h"

int main(int argc, char** argv) {
  using namespace tdaot::tool;
  CLI::App app{"Inspect, run and benchmark tdaot packages (.pt2).", "tdaot-run"};
  app.require_subcommand(1);
  const Command commands[] = {add_inspect(app), add_verify(app), add_run(app), add_bench(app),
                              add_soak(app), add_swap(app)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    std::cerr << "tdaot-run: " << e.what() << "\n\n" << app.help();
    return kUsage;
  }

  try {
    for (const Command& command : commands) {
      if (*command.app) return command.run();
    }
    return kUsage;  // unreachable: require_subcommand(1)
  } catch (const UsageError& e) {
    std::cerr << "tdaot-run: " << e.what() << "\n";
    return kUsage;
  } catch (const tdaot::Error& e) {
    std::cerr << "tdaot-run: " << e.what() << "\n";
    return kTdaotError;
  } catch (const std::exception& e) {
    // Not a tdaot error (a bug: each input should be refused as one): still one line, exit 1.
    std::cerr << "tdaot-run: internal error: " << e.what() << "\n";
    return kTdaotError;
  }
}
