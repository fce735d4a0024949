from django.apps import AppConfig


class CodespacesConfig(AppConfig):
    name = "codespaces"
    verbose_name = "Codespaces"

    def ready(self) -> None:
        # A codespace is a scheduling Workload of kind "codespace": follow its state changes.
        from codespaces.audit import codespace_state_findings, suspended_codespace_findings
        from codespaces.defrag import movability, record_move_notices
        from codespaces.observer import on_codespace_workloads_changed
        from codespaces.services.suspend import tell_owners
        from scheduling.defrag_hooks import register_movability, register_move_listener
        from scheduling.observers import register_workload_observer
        from scheduling.services.audit import install_codespace_check

        register_workload_observer("codespace", on_codespace_workloads_changed)
        # Polite reclaim: the owner is told of a notice given, executed or cancelled.
        register_workload_observer("codespace_reclaim_notice", tell_owners)
        # Defragmentation asks whether a codespace may move and tells its owner why it moved.
        register_movability("codespace", movability)
        register_move_listener("codespace", record_move_notices)
        # The auditor checks the stored state against the phase derived by codespaces.phase.
        install_codespace_check(codespace_state_findings)
        # ... and that a codespace suspended by polite reclaim keeps its home and can start again.
        install_codespace_check(suspended_codespace_findings, "codespace_suspended")
