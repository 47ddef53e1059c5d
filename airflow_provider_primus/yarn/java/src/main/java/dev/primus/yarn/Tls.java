package dev.primus.yarn;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;

/**
 * The ApplicationMaster's server side of TLS on a TLS job: the certificate the job's CA issued for
 * the AM's host (by {@code yarn/am_cert.py} in this container, before this JVM started) and its
 * PKCS#8 key, both PEM. Only the JDK: a cluster's Hadoop classpath need not carry BouncyCastle.
 */
final class Tls {
  private Tls() {}

  static SSLContext serverContext(Path certPem, Path keyPem) throws Exception {
    Certificate cert;
    try (var in = Files.newInputStream(certPem)) {
      cert = CertificateFactory.getInstance("X.509").generateCertificate(in);
    }
    byte[] der = pemBody(new String(Files.readAllBytes(keyPem), StandardCharsets.US_ASCII), "PRIVATE KEY");
    String algorithm = cert.getPublicKey().getAlgorithm(); // EC for the job CA's leaves
    PrivateKey key = KeyFactory.getInstance(algorithm).generatePrivate(new PKCS8EncodedKeySpec(der));
    char[] password = new char[0];
    KeyStore store = KeyStore.getInstance("PKCS12");
    store.load(null, null);
    store.setKeyEntry("am", key, password, new Certificate[] {cert});
    KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
    kmf.init(store, password);
    SSLContext context = SSLContext.getInstance("TLS");
    context.init(kmf.getKeyManagers(), null, null);
    return context;
  }

  private static byte[] pemBody(String pem, String label) {
    String begin = "-----BEGIN " + label + "-----";
    String end = "-----END " + label + "-----";
    int from = pem.indexOf(begin);
    int to = pem.indexOf(end);
    if (from < 0 || to < from) {
      throw new IllegalArgumentException("not a PEM " + label);
    }
    return Base64.getMimeDecoder().decode(pem.substring(from + begin.length(), to));
  }
}
