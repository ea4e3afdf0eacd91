from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "control_plane.accounts"
    label = "accounts"
    verbose_name = "Accounts"
