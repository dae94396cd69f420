package testcluster

import (
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigContext names the cluster, user and context of Kubeconfig.
const KubeconfigContext = "actorinformer-local"

// Kubeconfig returns a kubeconfig for AdminUser (system:masters) that
// verifies the apiserver's serving certificate (CAData) instead of
// skipping TLS verification.
func (c *Cluster) Kubeconfig() *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[KubeconfigContext] = &clientcmdapi.Cluster{Server: c.Host(), CertificateAuthorityData: c.CAData()}
	cfg.AuthInfos[KubeconfigContext] = &clientcmdapi.AuthInfo{Token: c.adminToken}
	cfg.Contexts[KubeconfigContext] = &clientcmdapi.Context{Cluster: KubeconfigContext, AuthInfo: KubeconfigContext, Namespace: "default"}
	cfg.CurrentContext = KubeconfigContext
	return cfg
}

// WriteKubeconfig writes Kubeconfig to path (mode 0600).
func (c *Cluster) WriteKubeconfig(path string) error {
	return clientcmd.WriteToFile(*c.Kubeconfig(), path)
}
