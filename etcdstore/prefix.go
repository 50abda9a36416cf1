package etcdstore

// Prefix is the key prefix the store keeps its keys under ("/registry"): a
// key is Prefix() + "/" + "<resource>/<namespace>/<name>". Errors about a
// stored value name its key so, as etcdctl knows it.
func (s *Store) Prefix() string { return s.prefix }
