// l5pgd: L5 proxy daemon for PostgreSQL. See README.md and config/l5pgd.example.yaml.
#include <getopt.h>
#include <signal.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "daemon/fd_limit.hpp"
#include "daemon/log_format.hpp"
#include "daemon/metrics.hpp"
#include "daemon/metrics_server.hpp"
#include "daemon/process_signals.hpp"
#include "daemon/reload.hpp"
#include "daemon/server.hpp"
#include "daemon/settings.hpp"
#include "l5pg_version.hpp"
#include "transport/wait/wait_id.hpp"

namespace {

constexpr const char* kUsage =
    "Usage: l5pgd [-c FILE] [-o KEY=VALUE]... [--check]\n"
    "\n"
    "L5 proxy for PostgreSQL: serves clients over shared memory (via libl5pg.so),\n"
    "Unix sockets and TCP, and forwards to an unmodified Postgres.\n"
    "\n"
    "  -c, --config FILE     YAML configuration (see config/l5pgd.example.yaml)\n"
    "  -o, --set KEY=VALUE   override one key, e.g. -o listen.port=6433 (repeatable)\n"
    "      --check           validate the configuration and exit\n"
    "  -V, --version         print the version and exit\n"
    "  -h, --help            this help\n"
    "\n"
    "Signals: SIGHUP reloads the configuration (keys that need a restart are logged and\n"
    "kept); SIGTERM (or SIGQUIT) stops now; SIGINT refuses new sessions (FATAL 57P03;\n"
    "cancel requests still pass) and waits for the open ones to end, and a second SIGINT\n"
    "or SIGTERM then stops now.\n";

struct Options {
    std::string config_path;
    std::vector<std::string> overrides;
    bool check_only = false;
};

std::optional<Options> parse_options(int argc, char** argv, int& exit_code) {
    static const option long_options[] = {
        {"config", required_argument, nullptr, 'c'}, {"set", required_argument, nullptr, 'o'},
        {"check", no_argument, nullptr, 'k'},        {"version", no_argument, nullptr, 'V'},
        {"help", no_argument, nullptr, 'h'},         {nullptr, 0, nullptr, 0}};
    Options options;
    int opt;
    while ((opt = getopt_long(argc, argv, "c:o:Vh", long_options, nullptr)) != -1) {
        switch (opt) {
            case 'c':
                options.config_path = optarg;
                break;
            case 'o':
                options.overrides.emplace_back(optarg);
                break;
            case 'k':
                options.check_only = true;
                break;
            case 'V':
                std::printf("l5pgd %s\n", L5PG_VERSION);
                exit_code = 0;
                return std::nullopt;
            case 'h':
                std::fputs(kUsage, stdout);
                exit_code = 0;
                return std::nullopt;
            default:
                std::fputs(kUsage, stderr);
                exit_code = 2;
                return std::nullopt;
        }
    }
    if (optind < argc) {
        std::fprintf(stderr, "l5pgd: unexpected argument '%s'\n%s", argv[optind], kUsage);
        exit_code = 2;
        return std::nullopt;
    }
    return options;
}

void setup_logging(const std::string& level) {
    auto logger = spdlog::stderr_color_mt("l5pgd");
    l5pg::daemon::apply_log_format(*logger, l5pg::daemon::detect_log_destination());
    logger->set_level(spdlog::level::from_str(level));
    logger->flush_on(spdlog::level::info);
    spdlog::set_default_logger(logger);
}

int run(l5pg::daemon::SettingsPtr settings, l5pg::daemon::ConfigSource source) {
    using namespace l5pg::daemon;
    const l5pg::config::Config& config = settings->config;
    ::signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(config);
    Metrics metrics;
    Health health;
    metrics.databases().configure(config.metrics.labels, config.metrics.label_limit);
    std::unique_ptr<MetricsServer> metrics_server;
    if (!config.metrics.listen.empty()) {
        const auto [host, port] =
            l5pg::config::parse_host_port("metrics.listen", config.metrics.listen);
        metrics_server = std::make_unique<MetricsServer>(host, port, metrics, health);
        spdlog::info("metrics on http://{}:{}/metrics", host, metrics_server->port());
    }
    Server server(std::move(settings), std::move(source), metrics, health);
    return server.run();
}

}  // namespace

int main(int argc, char** argv) {
    l5pg::daemon::prepare_process_signals();
    int exit_code = 0;
    const std::optional<Options> options = parse_options(argc, argv, exit_code);
    if (!options)
        return exit_code;

    l5pg::config::Config config;
    try {
        config = l5pg::config::load(options->config_path, options->overrides);
    } catch (const l5pg::config::ConfigError& e) {
        std::fprintf(stderr, "l5pgd: invalid configuration: %s\n", e.what());
        return 2;
    }
    l5pg::daemon::SettingsPtr settings;
    try {
        // Loads the ident map and the TLS files.
        settings = std::make_shared<const l5pg::daemon::Settings>(std::move(config));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "l5pgd: invalid configuration: %s\n", e.what());
        return 2;
    }
    const std::vector<std::string> idle_keys = settings->warnings();
    if (options->check_only) {
        for (const std::string& line : idle_keys)
            std::fprintf(stderr, "l5pgd: warning: %s\n", line.c_str());
        std::printf("l5pgd: configuration OK\n");
        return 0;
    }
    setup_logging(settings->config.logging.level);
    for (const std::string& line : idle_keys)
        spdlog::warn("configuration: {}", line);
    // The workers name their blocks (Worker::arm_sessions); clients that talk to several
    // daemons tell the names apart because each daemon starts at a random number.
    l5pg::wait::seed_wait_ids();
    try {
        return run(std::move(settings), {options->config_path, options->overrides});
    } catch (const std::exception& e) {
        spdlog::critical("{}", e.what());
        return 1;
    }
}
