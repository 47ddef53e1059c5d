package dev.primus.yarn;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Map;
import java.util.Properties;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * A Kerberized mini cluster: Hadoop's own test KDC (MiniKdc, Apache Kerby) on loopback, one service
 * principal for every daemon of this one JVM (a JVM has one login user, so separate NameNode,
 * ResourceManager and NodeManager principals would overwrite each other's login), HTTP principals
 * for SPNEGO on every web endpoint, and a client principal with its own keytab, as a cluster's
 * admins would hand one to a team.
 *
 * <p>Security is what a production cluster runs: Kerberos RPC between the daemons, SPNEGO on the
 * ResourceManager, NodeManager and NameNode web endpoints (WebHDFS included), block access tokens.
 * One test-only relaxation, as in Hadoop's own secure tests: the DataNode may serve on unprivileged
 * ports without SASL data-transfer protection ({@code ignore.secure.ports.for.testing}).
 */
final class Kerberos {
  static final String SERVICE = "primus";

  final MiniKdc kdc;
  final String realm;
  final String service;
  final String client;
  final File serviceKeytab;
  final File clientKeytab;
  final File clientKrb5Conf;

  private Kerberos(
      MiniKdc kdc, String service, String client, File serviceKeytab, File clientKeytab, File conf) {
    this.kdc = kdc;
    this.realm = kdc.getRealm();
    this.service = service;
    this.client = client;
    this.serviceKeytab = serviceKeytab;
    this.clientKeytab = clientKeytab;
    this.clientKrb5Conf = conf;
  }

  /** Starts the KDC and creates the principals; {@code clientUser} is the client's short name. */
  static Kerberos start(File state, String clientUser) throws Exception {
    File dir = new File(state, "kdc");
    Files.createDirectories(dir.toPath());
    Properties kconf = MiniKdc.createConf();
    kconf.setProperty(MiniKdc.KDC_BIND_ADDRESS, "127.0.0.1");
    kconf.setProperty(MiniKdc.KDC_PORT, "0");
    MiniKdc kdc = new MiniKdc(kconf, dir);
    kdc.start(); // also points this JVM's java.security.krb5.conf at the KDC
    String realm = kdc.getRealm();
    File serviceKeytab = new File(dir, "service.keytab");
    // Web clients name the host they dial (127.0.0.1 here); Hadoop's RPC clients the canonical name.
    kdc.createPrincipal(
        serviceKeytab,
        SERVICE + "/localhost",
        SERVICE + "/127.0.0.1",
        "HTTP/localhost",
        "HTTP/127.0.0.1");
    File clientKeytab = new File(dir, "client.keytab");
    kdc.createPrincipal(clientKeytab, clientUser);
    File krb5 = new File(dir, "client-krb5.conf");
    Files.write(krb5.toPath(), clientKrb5Conf(realm, kdc.getPort()).getBytes(StandardCharsets.UTF_8));
    return new Kerberos(
        kdc, SERVICE + "/localhost@" + realm, clientUser + "@" + realm, serviceKeytab, clientKeytab, krb5);
  }

  /**
   * The krb5.conf a client (MIT Kerberos: the Python side) uses: TCP only (Kerby listens on TCP),
   * no DNS, host names taken as written, so {@code HTTP/127.0.0.1} is the principal asked for.
   */
  private static String clientKrb5Conf(String realm, int port) {
    return String.join(
        "\n",
        "[libdefaults]",
        "  default_realm = " + realm,
        "  udp_preference_limit = 1",
        "  dns_lookup_kdc = false",
        "  dns_lookup_realm = false",
        "  dns_canonicalize_hostname = false",
        "  rdns = false",
        "  ticket_lifetime = 24h",
        "  renew_lifetime = 7d",
        "  forwardable = true",
        "[realms]",
        "  " + realm + " = {",
        "    kdc = 127.0.0.1:" + port,
        "  }",
        "[domain_realm]",
        "  localhost = " + realm,
        "  127.0.0.1 = " + realm,
        "");
  }

  /** The secure settings of every daemon, then the JVM's login as the service principal. */
  void secure(Configuration conf) throws Exception {
    String keytab = serviceKeytab.getPath();
    String http = "*"; // every HTTP/ principal of the keytab: whichever host name a client dialed
    Map<String, String> settings =
        Map.ofEntries(
            Map.entry("hadoop.security.authentication", "kerberos"),
            Map.entry("hadoop.security.authorization", "false"),
            // Without it the web endpoints keep core-default's StaticUserWebFilter (anyone is dr.who).
            Map.entry(
                "hadoop.http.filter.initializers",
                "org.apache.hadoop.security.AuthenticationFilterInitializer"),
            Map.entry("hadoop.http.authentication.type", "kerberos"),
            Map.entry("hadoop.http.authentication.simple.anonymous.allowed", "false"),
            Map.entry("hadoop.http.authentication.kerberos.principal", http),
            Map.entry("hadoop.http.authentication.kerberos.keytab", keytab),
            Map.entry("dfs.namenode.kerberos.principal", service),
            Map.entry("dfs.namenode.keytab.file", keytab),
            Map.entry("dfs.datanode.kerberos.principal", service),
            Map.entry("dfs.datanode.keytab.file", keytab),
            Map.entry("dfs.web.authentication.kerberos.principal", http),
            Map.entry("dfs.web.authentication.kerberos.keytab", keytab),
            Map.entry("dfs.namenode.kerberos.internal.spnego.principal", http),
            Map.entry("dfs.block.access.token.enable", "true"),
            Map.entry("dfs.http.policy", "HTTP_ONLY"),
            Map.entry("ignore.secure.ports.for.testing", "true"),
            Map.entry("yarn.resourcemanager.principal", service),
            Map.entry("yarn.resourcemanager.keytab", keytab),
            Map.entry("yarn.nodemanager.principal", service),
            Map.entry("yarn.nodemanager.keytab", keytab),
            // Every container's environment names the realm's configuration, as a node's own
            // /etc/krb5.conf would (the ApplicationMaster's JVM reads it from KRB5_CONFIG).
            Map.entry(
                "yarn.nodemanager.admin-env",
                "MALLOC_ARENA_MAX=$MALLOC_ARENA_MAX,KRB5_CONFIG=" + clientKrb5Conf.getPath()),
            Map.entry("yarn.resourcemanager.webapp.spnego-principal", http),
            Map.entry("yarn.resourcemanager.webapp.spnego-keytab-file", keytab),
            Map.entry("yarn.nodemanager.webapp.spnego-principal", http),
            Map.entry("yarn.nodemanager.webapp.spnego-keytab-file", keytab));
    settings.forEach(conf::set);
    UserGroupInformation.setConfiguration(conf);
    UserGroupInformation.loginUserFromKeytab(service, keytab);
  }

  /** What a client needs, for cluster.json. */
  Map<String, Object> facts() {
    return Json.map(
        "realm", realm,
        "kdc", "127.0.0.1:" + kdc.getPort(),
        "krb5_conf", clientKrb5Conf.getPath(),
        "principal", client,
        "keytab", clientKeytab.getPath(),
        "service_principal", service);
  }

  void stop() {
    kdc.stop();
  }
}
