# shellcheck shell=bash
# shellcheck disable=SC2154 # up.sh and lib.sh set the variables before sourcing this
# hack/cluster/up-pki.sh — sourced by up.sh (step 3: the PKI and kubeconfigs), in its order.
# ---- 3. PKI (openssl) ----------------------------------------------------------------
t=$(now_ns)
# new_key FILE: an ECDSA P-256 key (fast to generate, supported everywhere here).
new_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; chmod 600 "$1"; }

# new_cert NAME SUBJECT EXTENSIONS: key + certificate signed by the cluster CA.
new_cert() {
  local name="$1" subj="$2" ext="$3"
  new_key "$PKI/$name.key"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 30 -out "$PKI/$name.crt" \
    -extfile <(printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n%s\n' "$ext") \
    2>/dev/null
  rm -f "$PKI/$name.csr"
}
client='extendedKeyUsage=clientAuth'
server='extendedKeyUsage=serverAuth'

new_key "$PKI/ca.key"
openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=sandprobe-cluster-ca" -days 30 \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out "$PKI/ca.crt" 2>/dev/null
new_cert apiserver "/CN=kube-apiserver" \
  "$server
subjectAltName=IP:$NODE_IP,IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
new_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
new_cert admin "/O=system:masters/CN=sandprobe-admin" "$client"
new_cert controller-manager "/CN=system:kube-controller-manager" "$client"
new_cert scheduler "/CN=system:kube-scheduler" "$client"
new_cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" "$client"
new_cert kubelet-serving "/CN=$NODE_NAME" "$server
subjectAltName=IP:$NODE_IP,DNS:$NODE_NAME"
# Service-account token signing key pair (RSA, the most widely verifiable).
openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null

# kubeconfig NAME CERT: a kubeconfig with embedded credentials.
kubeconfig() {
  local out="$CLUSTER_DIR/$1.kubeconfig" cert="$2"
  cat > "$out" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandprobe
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 "$PKI/$cert.key")
contexts:
- name: sandprobe
  context: {cluster: sandprobe, user: $cert}
current-context: sandprobe
EOF
  chmod 600 "$out"
}
kubeconfig admin admin
kubeconfig controller-manager controller-manager
kubeconfig scheduler scheduler
kubeconfig kubelet kubelet-client
mark "pki + kubeconfigs" "$t"
