"""STAND-IN for infera.engine.rocm_rdma_env: the environment defaults, as no-ops."""


def apply_rocm_rdma_env_defaults():
    return {}


def apply_vllm_aiter_default():
    return None


def apply_kv_host_ip_default():
    return None


def apply_mooncake_topology_default(num_gpus=16):
    return None
