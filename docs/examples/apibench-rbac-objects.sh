#!/usr/bin/env bash
# 200 ClusterRoles and 1,000 RoleBindings in namespace apibench (other
# users' and groups'), and the grant the anonymous apibench client runs
# under (kubectl sends no token over plain HTTP, so curl).
set -euo pipefail
S=$1; T=$2
post() { curl -sf -o /dev/null -H "Authorization: Bearer $T" -H 'Content-Type: application/json' -X POST "$S$1" -d "$2"; }
post /api/v1/namespaces '{"metadata":{"name":"apibench"}}' || true
for i in $(seq 1 200); do
  post /apis/rbac.authorization.k8s.io/v1/clusterroles '{"metadata":{"name":"bench-role-'$i'"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list"]},{"apiGroups":["apps"],"resources":["deployments"],"verbs":["get"]}]}'
done
for i in $(seq 1 1000); do
  post /apis/rbac.authorization.k8s.io/v1/namespaces/apibench/rolebindings '{"metadata":{"name":"bench-binding-'$i'"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"bench-role-'$(( (i % 200) + 1 ))'"},"subjects":[{"kind":"User","name":"user-'$i'","apiGroup":"rbac.authorization.k8s.io"},{"kind":"Group","name":"group-'$(( i % 50 ))'","apiGroup":"rbac.authorization.k8s.io"}]}'
done
post /apis/rbac.authorization.k8s.io/v1/clusterrolebindings '{"metadata":{"name":"apibench-anonymous"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"kind":"Group","name":"system:unauthenticated","apiGroup":"rbac.authorization.k8s.io"}]}'
n() { curl -s -H "Authorization: Bearer $T" "$S$1" | grep -o '"bench-[a-z]*-[0-9]*"' | sort -u | wc -l; }
echo "bench ClusterRoles: $(n /apis/rbac.authorization.k8s.io/v1/clusterroles), RoleBindings in apibench: $(n /apis/rbac.authorization.k8s.io/v1/namespaces/apibench/rolebindings)"
