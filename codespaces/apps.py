from django.apps import AppConfig


class CodespacesConfig(AppConfig):
    name = "codespaces"
    verbose_name = "Codespaces"
