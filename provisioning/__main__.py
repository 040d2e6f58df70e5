import sys

print(
    "python -m provisioning: not available yet: the provisioning steps are not part of this build.",
    file=sys.stderr,
)
sys.exit(3)
