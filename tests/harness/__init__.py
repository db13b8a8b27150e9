"""Python test harness for l5pg: throwaway PostgreSQL clusters, l5pgd processes, clients."""
