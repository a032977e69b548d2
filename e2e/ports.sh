# Sourced by the e2e scripts with `base` set: defines `<name>_port` for each line of e2e/ports.
while IFS='=' read -r name offset; do
  case "$name" in ''|'#'*) continue ;; esac
  printf -v "${name}_port" '%s' "$((base + offset))"
done <"$(dirname "${BASH_SOURCE[0]}")/ports"
