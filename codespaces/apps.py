from django.apps import AppConfig


class CodespacesConfig(AppConfig):
    name = "codespaces"
    verbose_name = "Codespaces"

    def ready(self) -> None:
        # A codespace is a scheduling Workload of kind "codespace": follow its state changes.
        from codespaces.observer import on_codespace_workloads_changed
        from scheduling.observers import register_workload_observer

        register_workload_observer("codespace", on_codespace_workloads_changed)
