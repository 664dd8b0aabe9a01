from django.apps import AppConfig


class PoolsConfig(AppConfig):
    name = "trainhub.pools"
    label = "pools"
    verbose_name = "Worker pools"
